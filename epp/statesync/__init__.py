"""Sharing what each picker of a pool learns alone with the others: replicas through Valkey.

``records`` is what travels, ``inflight`` folds the peers' in-flight counts into the endpoints,
``pool_sync`` binds a pool's plugins and counts to the links, ``valkey`` is the link between
replicas (a stream per pool on a Valkey or Redis server), ``address`` reads llm-d's server URLs.
"""
