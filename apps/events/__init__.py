"""The event bus: publish small typed events from any process; every web worker receives them.

Producers call ``apps.events.bus.publish_event``; web workers serve them through
``apps.events.hub``. The bus knows neither its producers nor its consumers.
"""
