"""Adapters: the drivers behind the ports. Import the module you need; nothing happens here."""
