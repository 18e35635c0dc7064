"""The pipeline that wires the stages: ingest, cost and group a graph into a problem
(:mod:`.prepare`), look up the placement cache (:mod:`.cache`), place, validate and rewrite
(:mod:`.engine`)."""
