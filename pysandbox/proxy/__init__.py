"""The egress proxy of ``network="proxy"``: the allow list (``rules``), the decisions
on addresses (``addresses``), the TLS server name (``sni``), HTTP heads (``httphead``),
one connection (``handler``), the events (``events``) and the server (``server``).
Nothing here is imported by ``import pysandbox``; the launch imports it when a policy
asks for the proxy."""
