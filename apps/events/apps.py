from django.apps import AppConfig


class EventsConfig(AppConfig):
    name = "apps.events"
    label = "events"
    verbose_name = "Event bus"

    def ready(self) -> None:
        from .sessions import connect_signals

        connect_signals()
