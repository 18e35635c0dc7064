"""Core types every stage shares: the cluster of devices (:mod:`.cluster`) and the
placement problem with the interface of every placer (:mod:`.problem`)."""
