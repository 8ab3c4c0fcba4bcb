"""The Cluster page: nodes, roles, term, indexes, lag, storage alarm, leader changes and
sparklines of the last minutes (console/views/cluster.py has the data). The live part is
cluster_live.html, which htmx fetches again every 2 s from /ui/cluster/live."""

from __future__ import annotations

from statekeeper.console.context import PageContext
from statekeeper.console.views.cluster import MetricHistory, cluster_view
from statekeeper.node.api.server import Response

TITLE = "Cluster"
PATH = "/ui/cluster"
LIVE = PATH + "/live"


async def _model(ctx: PageContext):
    history = ctx.shared("cluster.history", MetricHistory)
    return await cluster_view(ctx.client, ctx.nodes, history)


async def page(ctx: PageContext) -> Response:
    return ctx.render("cluster.html", model=await _model(ctx), live=LIVE)


async def live(ctx: PageContext) -> Response:
    return ctx.render("cluster_live.html", model=await _model(ctx), live=LIVE)


ROUTES = [("GET", PATH, page), ("GET", LIVE, live)]
