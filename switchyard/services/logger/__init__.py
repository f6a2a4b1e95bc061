"""Logger: the durable JetStream consumer that turns stage records, spans and feedback into request records."""
