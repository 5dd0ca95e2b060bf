from django.urls import path

from . import views

app_name = "documents"

urlpatterns = [
    path("documents/", views.document_list_page, name="list"),
    path("documents/<int:document_id>/", views.document_detail_page, name="detail"),
    path("api/documents/", views.documents_api, name="api-list"),
    path("api/documents/<int:document_id>/", views.document_api, name="api-detail"),
]
