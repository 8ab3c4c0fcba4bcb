"""The node's HTTP face: the server, the routes, the body codec, authorization, connection limits,
chunked answers, membership, watch and backup routes (docs/architecture.md, "Layers").
"""
