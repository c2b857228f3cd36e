"""State shared between workers that is not the durable record: rate limits, session
state and its invalidation."""
