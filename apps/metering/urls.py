from django.urls import path

from . import views

app_name = "metering"

urlpatterns = [
    path("usage/", views.usage_page, name="page"),
    path("api/usage/", views.usage_api, name="api"),
]
