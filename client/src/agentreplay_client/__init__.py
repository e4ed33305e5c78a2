"""The collector as its users see it: what the CLI, the analysis and the collector itself agree on.

:mod:`.models` (the stored records: runs, chain statuses, verdicts, decisions, log entries),
:mod:`.errors`, :mod:`.reader` (the read interface, the same on a store and through a collector),
:mod:`.collector` (the read and control API over HTTP, standard library only), :mod:`.collectorid` and
:mod:`.tls` (how a client knows it talks to its collector), :mod:`.grants` (replay grants the CLI signs and
the collector checks) and :mod:`.incidents` (the incidents kept for halted runs).

Nothing here needs the store's engine (chDB, ClickHouse, Arrow) or a server: the CLI reads a running
collector with this distribution alone.
"""
