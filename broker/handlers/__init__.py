"""One module per API family; each handler is
`async def (services: BrokerServices, ctx: RequestContext, request) -> response | None`:
it is given the broker's services (broker/services.py), never the server."""
