"""A run's events: numbered, held until durable, fanned out, followed from a cursor (004 §2.11).

Owns the in-process fan-out (`hub.EventHub`: subscriptions by topic, bounded buffers that
report a drop as a gap), following a run's or a session's events from a cursor
(`stream.follow`, StreamRunEvents) and the PostgreSQL LISTEN that wakes the subscribers of
events another replica wrote (`notify.EventListener`, decision 0011).
"""
