"""Minimal Django settings for the Channels reference app (benchmark only)."""

import os

SECRET_KEY = "benchmark-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["channels"]
ROOT_URLCONF = "loadtests.channels_ref.asgi"
urlpatterns: list[object] = []
ASGI_APPLICATION = "loadtests.channels_ref.asgi.application"
# The default, most used layer: per-channel lists and a Lua group_send (not the pub/sub one).
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [os.environ["CHANNELS_REDIS_URL"]], "capacity": 1000},
    }
}
