"""URL wiring: admin, dashboard, the REST API, schema and metrics."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from common.api import ApiRootView
from durablecache import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz/", views.healthz, name="healthz"),
    path("readyz/", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("dashboard/", include("dashboard.urls")),
    path("api/v1/", ApiRootView.as_view(), name="api-root"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The schema for people: Swagger UI from the node's own static files
    # (drf-spectacular-sidecar), so it works without reaching any CDN.
    path(
        "api/v1/schema/swagger-ui/",
        SpectacularSwaggerView.as_view(url_name="schema"),
        name="schema-swagger-ui",
    ),
    path("api/v1/", include("cache.api.urls")),
    path("api/v1/", include("clients.api.urls")),
    # Browsers ask for /favicon.ico on every page without an icon link
    # (the admin, the schema pages): the dashboard's icon, not a 404.
    path("favicon.ico", RedirectView.as_view(url=static("dashboard/favicon.svg"))),
    # Every 4xx under /api/ carries the JSON error body, unknown paths too:
    # CSRF-exempt, or a DELETE/POST to an unknown path would get Django's
    # HTML 403 page instead of the JSON 404 (nothing is changed there).
    re_path(r"^api/", csrf_exempt(views.api_not_found)),
]
