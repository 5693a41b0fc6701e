"""A run's events: numbered, held until durable, fanned out, followed from a cursor (004 §2.11).

Owns a run's producer side (`channel.RunChannel`: numbering, holding a durable event until
its save point committed, the seq reservation of provisional ones), the events built
outside a channel (`build`), the in-process fan-out (`hub.EventHub`: subscriptions by
topic, bounded buffers that report a drop as a gap), following a run's or a session's
events from a cursor (`stream.follow`, StreamRunEvents) and the PostgreSQL LISTEN that wakes
the subscribers of events another replica wrote (`notify.EventListener`, decision 0011).
"""
