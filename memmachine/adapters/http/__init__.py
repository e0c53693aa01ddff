"""Plain HTTP: attachments fetched by URL."""
