"""The event bus: publish small typed events from any process; every web worker receives them.

Producers call ``apps.events.bus.publish_event``; web workers serve them through
``apps.events.hub`` (one subscription per process) and ``apps.events.stream.event_stream``
(the stream protocol, one call). ``apps.events.sessions`` ends the streams of a session that
ended. The bus knows neither its producers nor its consumers.
"""
