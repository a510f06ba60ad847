"""Settings: the sections (named as the TOML keys), their loader, and the parsers of values."""
