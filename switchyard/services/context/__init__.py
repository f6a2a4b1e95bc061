"""Context: assembles each request's prompt (instructions, memory, files, history) and keeps conversations."""
