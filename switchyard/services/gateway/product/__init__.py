"""Product routes: conversations, files, memory and knowledge, feedback."""
