"""Behavioral statement packs shipped with callgate."""
