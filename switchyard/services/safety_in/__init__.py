"""Input safety: classifies the new user text (and new attachments) before anything else sees it."""
