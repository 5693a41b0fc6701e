"""The session store service (SessionService, seed 004 §2.5–§2.5h).

Rooms: `config` (environment), `server` (process), `servicer` (proto <-> domain), `codec`
(the proto encoding of entries), `store` (the domain over SQL), `tree` (pure folds and
walks), `domain` (values and validation), `models` + `migrations` (tables), `writer`
(the run loop's persist boundary). See docs/services/sessions.md.
"""
