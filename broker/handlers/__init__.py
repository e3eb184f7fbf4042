"""One module per API family; each handler is `async def (server, ctx, request) -> response | None`."""
