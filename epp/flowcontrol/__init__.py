"""Flow control: the queue between admission and scheduling (the ``flowControl`` feature gate).

``queues.py`` holds the bands, flows and capacity; ``controller.py`` the dispatch loop, TTLs and
metrics; ``outcomes.py`` what each way out means for the client. Policies are plugins
(``epp.plugins.flow_policies``); settings come from the config (``epp.config.flow_control``).
"""
