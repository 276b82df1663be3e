"""The web console: a JSON API and server-rendered pages over one store (docs/console.md).

``strata.console.views`` reads the store and the consumer groups into plain dicts (blocking
calls, run off the event loop); ``strata.console.app`` serves them with aiohttp;
``strata.console.server`` runs it alone (``strata console``) or beside the broker
(``strata serve --http``)."""
