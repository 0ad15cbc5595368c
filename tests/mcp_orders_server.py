"""A Model Context Protocol server of order tools, over stdio, for the CrewAI tests."""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

server = FastMCP("orders")


@server.tool()
def lookup_order(order_id: str) -> str:
    """Status of an order."""
    if order_id.startswith("Z"):
        raise ValueError(f"no order {order_id}")
    return "shipped"


if __name__ == "__main__":
    server.run()
