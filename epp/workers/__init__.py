"""``epp serve --workers N``: one picker pod serving its ext_proc port from N processes.

The process kubelet starts (the *parent*) is a whole picker as with one worker, and serves the port
too; it starts N-1 *children* (:mod:`epp.workers.child`) that serve the same port (SO_REUSEPORT).
What routing needs is kept consistent across them by the parent:

- endpoints and their metrics: each process follows the pool itself (the same reconcilers), but
  only the parent's scrape worker scrapes (``--workers`` implies ``--metrics-scrape-process``); the
  parent forwards what it is told to every child (:mod:`epp.workers.scrape_feed`);
- what each process learns alone (approximate-prefix insertions, in-flight counts): the records
  replicas share (:mod:`epp.statesync`), carried through the parent (:mod:`epp.workers.pipe_sync`);
  with ``--state-sync-address`` every process is a replica on the Valkey stream instead;
- ``/metrics``: the parent's, with the children's request-path series added (:mod:`epp.telemetry.merged`).

The kernel spreads connections over the processes, not streams, and Envoy opens one HTTP/2
connection per worker thread unless its ext_proc cluster limits the streams per connection
(``max_concurrent_streams``): docs/deploy.md says how to set it. A limit the picker advertised
itself would be wrong: Envoy sends a new connection's first streams before it reads the
picker's SETTINGS, and the streams over the limit would be refused (a 500 to the client).
"""
