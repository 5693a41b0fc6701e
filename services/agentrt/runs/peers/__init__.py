"""The run loop's door to its peers: gateway, tool service, session store (over gRPC).

Owns every call the run loop makes to another service (`client.Peers`, the one object the
loop holds) and a run's long-lived streams of those calls (`streams.RunCalls`, decision
0023). The only package of the service that imports grpc besides the servicer and the server.
"""
