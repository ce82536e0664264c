"""The Vault (persistence)."""
