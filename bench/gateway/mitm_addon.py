"""mitmproxy addon for bench/gateway.sh: the same work the gateway does for the bench, the
placeholder in `x-api-key` replaced by the key, and the stand-in API's name dialed on loopback."""
import os

PLACEHOLDER = "nestbox:resolve:env:ANTHROPIC_API_KEY"
KEY = os.environ["BENCH_KEY"]


class Inject:
    def server_connect(self, data):
        # like the gateway's --resolve: the name stays (SNI, Host), the address is loopback
        data.server.address = ("127.0.0.1", data.server.address[1])

    def request(self, flow):
        if flow.request.headers.get("x-api-key") == PLACEHOLDER:
            flow.request.headers["x-api-key"] = KEY


addons = [Inject()]
