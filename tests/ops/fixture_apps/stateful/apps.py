import sched
import threading

from django.apps import AppConfig


class StatefulConfig(AppConfig):
    name = "stateful"

    def ready(self):
        threading.Thread(target=print, daemon=True).start()  # a thread started at start-up
        self.timers = sched.scheduler()  # a scheduler created at start-up
