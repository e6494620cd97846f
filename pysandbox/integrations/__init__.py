"""Integrations of pysandbox with other frameworks, one module each, imported by name
(each needs its framework installed; this package imports none of them):

- ``pysandbox.integrations.deepagents``: a LangChain Deep Agents sandbox backend
  (``pip install 'pysandbox[deepagents]'``).
- ``pysandbox.integrations.ray``: ``SandboxCluster``, sandboxed commands across the nodes
  of a Ray cluster (``pip install 'pysandbox[ray]'``).
"""
