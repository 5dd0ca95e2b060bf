from django.urls import path

from . import views

app_name = "reports"

urlpatterns = [
    path("reports/", views.runs_page, name="runs"),
    path("reports/beat/", views.beat_fragment, name="beat"),
]
