"""The WSGI middleware in Flask and in Django (Debian's python3-flask,
python3-django), through their own test clients, against the real daemon."""

import flask
import pytest
from django.urls import path as django_path

from conftest import OK_TIMEOUT, fresh, url
from ratelimitd import Client
from ratelimitd.wsgi import RateLimitMiddleware


def flask_app(client, **kw):
    app = flask.Flask("limited")

    @app.route("/orders", methods=["GET", "POST"])
    def orders():
        return "hello from flask\n"
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, client, **kw)
    return app


def expect_429(r, policy):
    assert r.status_code == 429
    ra = r.headers.get("Retry-After", "")
    assert ra.isdigit() and 1 <= int(ra) <= 60, ra
    assert r.headers["X-RateLimit-Remaining"] == "0"
    assert r.headers["RateLimit-Policy"].startswith('"%s"' % policy), r.headers
    assert r.get_json() == {"error": "too many requests", "retry_after": int(ra)}


def test_flask_limit_then_429_with_the_daemons_headers(daemon):
    client = Client(url(daemon.port), timeout=OK_TIMEOUT, policy="conf")
    app = flask_app(client, key=lambda env: env.get("HTTP_X_API_KEY"))
    key = fresh()
    with app.test_client() as tc:
        rs = [tc.post("/orders", headers={"X-Api-Key": key}) for _ in range(4)]
        assert [r.status_code for r in rs] == [200, 200, 200, 429]
        assert rs[0].data == b"hello from flask\n"
        expect_429(rs[3], "conf")
        assert tc.post("/orders", headers={"X-Api-Key": fresh()}).status_code == 200


def test_flask_anonymous_callers_by_address(daemon, redis):
    client = Client(url(daemon.port), timeout=OK_TIMEOUT, policy="conf")
    app = flask_app(client)
    ip = "198.51.100.%d" % (int(fresh()[-4:], 16) % 250 + 1)
    with app.test_client() as tc:
        sts = [tc.get("/orders", environ_base={"REMOTE_ADDR": ip}).status_code for _ in range(4)]
        assert sts == [200, 200, 200, 429]
        assert any(ip in k for k in redis.cli("KEYS", "*").split()), "no key names %s" % ip


def test_flask_quota_headers_on_allowed_answers(daemon):
    client = Client(url(daemon.port), timeout=OK_TIMEOUT, policy="conf")
    app = flask_app(client, key=lambda env: "h-" + fresh(), headers=True)
    with app.test_client() as tc:
        r = tc.get("/orders")
        assert r.status_code == 200
        assert r.headers["X-RateLimit-Remaining"] == "2" and "Retry-After" not in r.headers, r.headers


def test_flask_fail_open_and_closed(down_port):
    for fail_open, want in ((True, 200), (False, 503)):
        app = flask_app(Client(url(down_port), timeout=1.0, fail_open=fail_open))
        with app.test_client() as tc:
            r = tc.get("/orders")
            assert r.status_code == want
            if want == 503:
                assert r.headers["Retry-After"] == "1"
                assert r.get_json() == {"error": "rate limiter unavailable"}


def test_flask_a_path_the_daemon_refuses_is_a_400(daemon):
    ran = []
    app = flask.Flask("limited")

    @app.route("/<path:p>")
    def anything(p):
        ran.append(p)
        return "ran"
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, Client(url(daemon.port), timeout=OK_TIMEOUT))
    with app.test_client() as tc:
        r = tc.get("/api/../../items")
        assert (r.status_code, r.get_json()) == (400, {"error": "bad request"})
    assert ran == []


@pytest.fixture(scope="module")
def django_app():
    import django
    from django.conf import settings
    settings.configure(DEBUG=False, SECRET_KEY="x" * 50, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"],
                       MIDDLEWARE=[], INSTALLED_APPS=[])
    django.setup()
    from django.core.wsgi import get_wsgi_application
    return get_wsgi_application()


def hello(request):
    from django.http import HttpResponse
    return HttpResponse("hello from django\n", content_type="text/plain")


urlpatterns = [django_path("orders", hello)]   # this module is Django's ROOT_URLCONF


def test_django_limit_then_429(daemon, django_app):
    from django.test.client import RequestFactory
    key = fresh()
    app = RateLimitMiddleware(django_app, Client(url(daemon.port), timeout=OK_TIMEOUT, policy="conf"),
                              key=lambda env: key)
    # the middleware wraps Django's WSGI application (wsgi.py): driven as a server would
    sts = []
    for _ in range(4):
        environ = RequestFactory()._base_environ(PATH_INFO="/orders", REQUEST_METHOD="GET")
        got = {}
        body = b"".join(app(environ, lambda st, h, e=None: got.update(st=st, h=h)))
        sts.append((int(got["st"].split()[0]), body))
    assert [s for s, _ in sts] == [200, 200, 200, 429]
    assert sts[0][1] == b"hello from django\n"
    assert b"too many requests" in sts[3][1]
