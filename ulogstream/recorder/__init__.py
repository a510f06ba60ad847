"""The recorder application: pipeline, decoding, status, identity, wiring and replay."""
