"""The operators' dashboard (``/dashboard/``): thin views over selectors and
services, Django templates under ``templates/dashboard/``; one module per
topic (``overview``, ``clients``, ``regions``), what they share in ``base``.

Staff only: an anonymous visitor is sent to the login page, a signed-in
plain user gets 403. Every change is a POST with a CSRF token, made after a
confirmation page where it cannot be undone, and goes through the same
services as the REST API and the admin. Live updates come over the
``/ws/v1/dashboard`` websocket (``dashboard.consumers``);
numbers that change all the time (queue sizes, charts) are polled as JSON.
"""
