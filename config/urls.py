from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="documents:list", permanent=False)),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("apps.ops.urls")),
    path("", include("apps.documents.urls")),
    path("", include("apps.reports.urls")),
    path("", include("apps.notifications.urls")),
    path("", include("apps.telemetry.urls")),
    path("", include("apps.metering.urls")),
]

# JSON on the API, a page in the site's layout otherwise (apps/error_pages.py).
handler400 = "apps.error_pages.bad_request"
handler403 = "apps.error_pages.permission_denied"
handler404 = "apps.error_pages.page_not_found"
handler500 = "apps.error_pages.server_error"
