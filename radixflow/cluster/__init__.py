"""Engine replicas on Ray Serve behind the OpenAI ingress, routed by the `radixflow.fleet` routers.

Only `ray_router` and `launch` import ray; a single-replica server never imports this package.
"""
