"""Behavioural statement packs shipped with callgate."""
