"""Tool runner: plans the tool calls a message needs and runs them before the model writes."""
