"""Settings of authentication: local bearer tokens and an identity provider's JWTs (shared/trust/oidc.py)."""

from __future__ import annotations

from pydantic import Field

from shared.settings.area import Area
from shared.trust.oidc import OidcConfig

LOCAL_USER = "local"
LOCAL_TOKEN = "gamma-local-dev-token"


class AuthSettings(Area):
    """Who may call: the local bearer tokens and an identity provider's JWTs."""

    api_tokens: str = Field("", validation_alias="GAMMA_API_TOKENS",
        description="`user:token,user:token`.")
    service_token: str = Field("gamma-local-service-token", validation_alias="GAMMA_SERVICE_TOKEN",
        description="Bearer token of notification producers.")
    # Bearer JWTs from an identity provider (shared/trust/oidc.py; deploy/README.md "Identity provider").
    oidc_issuer: str = Field("", validation_alias="GAMMA_OIDC_ISSUER",
        description="Accept bearer JWTs from this identity provider (`iss` checked); with the issuer set and "
                    "`GAMMA_API_TOKENS` unset there is no local token.")
    oidc_audience: str = Field("", validation_alias="GAMMA_OIDC_AUDIENCE",
        description="The `aud` the identity provider's JWTs must carry (required with `GAMMA_OIDC_ISSUER`).")
    oidc_jwks_url: str = Field("", validation_alias="GAMMA_OIDC_JWKS_URL",
        description="The IdP's key set; unset, `jwks_uri` from `{issuer}/.well-known/openid-configuration`.")
    oidc_user_claim: str = Field("sub", validation_alias="GAMMA_OIDC_USER_CLAIM",
        description="The JWT claim naming the user.")
    oidc_scope_claim: str = Field("scope", validation_alias="GAMMA_OIDC_SCOPE_CLAIM",
        description="The JWT claim (space-separated string or list) holding a token's scopes.")
    oidc_service_scope: str = Field("gamma.service", validation_alias="GAMMA_OIDC_SERVICE_SCOPE",
        description="The scope a service's token must carry: notification producers and connectors (registration, results).")
    oidc_leeway_s: float = Field(30.0, ge=0, le=300, validation_alias="GAMMA_OIDC_LEEWAY_S",
        description="Clock leeway for `exp`/`nbf` (seconds).")
    oidc_jwks_min_refresh_s: float = Field(30.0, ge=0, validation_alias="GAMMA_OIDC_JWKS_MIN_REFRESH_S",
        description="Least time between two JWKS fetches, by an unknown `kid` or by the background refresh of a stale set (seconds).")

    def tokens(self) -> dict[str, str]:
        """token -> user. With neither GAMMA_API_TOKENS nor an OIDC issuer set, one local user with a
        fixed token (an IdP-backed deployment gets no well-known token)."""
        if not self.api_tokens.strip():
            return {} if self.oidc_issuer else {LOCAL_TOKEN: LOCAL_USER}
        pairs: dict[str, str] = {}
        for item in self.api_tokens.split(","):
            user, _, token = item.strip().partition(":")
            if user and token:
                pairs[token] = user
        return pairs

    def oidc(self) -> OidcConfig | None:
        if not self.oidc_issuer:
            return None
        if not self.oidc_audience:
            raise ValueError("GAMMA_OIDC_ISSUER is set without GAMMA_OIDC_AUDIENCE")
        return OidcConfig(issuer=self.oidc_issuer, audience=self.oidc_audience, jwks_url=self.oidc_jwks_url,
                          user_claim=self.oidc_user_claim, scope_claim=self.oidc_scope_claim,
                          service_scope=self.oidc_service_scope, leeway_s=self.oidc_leeway_s,
                          min_refresh_s=self.oidc_jwks_min_refresh_s)
