"""Optional integrations with other tools (imported lazily; never required by the core)."""
