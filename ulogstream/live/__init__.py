"""What leaves the process live, pure: which rows, their payloads, and the outbox."""
