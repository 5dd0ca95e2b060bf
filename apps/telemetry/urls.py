from django.urls import path

from . import views

app_name = "telemetry"

urlpatterns = [
    path("telemetry/", views.telemetry_page, name="page"),
    path("api/telemetry/stream/", views.telemetry_stream_view, name="stream"),
]
