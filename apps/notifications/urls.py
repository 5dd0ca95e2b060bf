from django.urls import path

from . import views

app_name = "notifications"

urlpatterns = [
    path("notifications/", views.notifications_page, name="page"),
    path("notifications/broadcast/", views.broadcast_view, name="broadcast"),
    path("api/notifications/", views.notifications_api, name="api"),
    path("api/notifications/stream/", views.event_stream_view, name="stream"),
]
