"""The picker's Kubernetes side: list+watch reconcilers that feed the datastore (kr8s, async).

``kube`` only writes to the datastore, through :class:`~epp.datastore.types.DatastoreWriter`;
it knows nothing of scheduling or ext_proc. The composition root builds one ``Api`` with
:func:`~epp.kube.client.make_api` and one :class:`~epp.kube.manager.PoolReconcilers` (or
:class:`~epp.kube.standalone.StandaloneReconciler`) per pool. Importing this package starts nothing.
"""
