// The official A2A JS SDK's client factory as our scripts use it: the JSON-RPC
// transport, every request carrying the bearer TOKEN (if any); and a message's text.
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";

export function clientFactory(token) {
  const authorized = (input, init = {}) => {
    const headers = new Headers(init.headers ?? {});
    if (token) headers.set("Authorization", `Bearer ${token}`);
    return fetch(input, { ...init, headers });
  };
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl: authorized })],
    }),
  );
}

export const textOf = (parts) =>
  parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
