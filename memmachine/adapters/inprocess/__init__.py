"""In-process implementations of ports for one process: the API keys' rate limiter."""
