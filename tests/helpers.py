"""Assertions shared by the REST tests."""


def assert_error(response, status, code=None):
    """Every error under /api/ is {"error": {"code", "message"}}."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]
