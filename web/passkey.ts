// The WebAuthn ceremonies, through @simplewebauthn/browser. Every ceremony also asks the passkey
// for its PRF output (WebAuthn's prf extension) on one fixed salt: when the authenticator offers
// it, that output unlocks the member's key (keys.ts). It is removed from the response before the
// response goes to the server, which refuses any response carrying it.
import { bufferToBase64URLString, startAuthentication, startRegistration, WebAuthnAbortService } from '@simplewebauthn/browser';
import type {
  AuthenticationResponseJSON,
  PublicKeyCredentialCreationOptionsJSON,
  PublicKeyCredentialRequestOptionsJSON,
  RegistrationResponseJSON,
} from '@simplewebauthn/browser';
import type { ReauthOperation, SignedIn } from '../schemas/wire.ts';
import { api } from './api.ts';

/** The one PRF input: the output differs per passkey already, so the salt needs no secret. */
const PRF_SALT = new TextEncoder().encode('postern/key-unlock/v1');

export interface Unlocking {
  /** The passkey's credential id (base64url). */
  credentialId: string;
  /** 32 bytes from the passkey's PRF, or null when the authenticator does not offer PRF. */
  prf: Uint8Array | null;
}

interface PrfOutput {
  prf?: { enabled?: boolean; results?: { first?: ArrayBuffer | Uint8Array } };
}

function takePrf(response: { clientExtensionResults: unknown }): Uint8Array | null {
  const ext = response.clientExtensionResults as PrfOutput;
  const first = ext.prf?.results?.first;
  // Key material stays in the browser.
  if (ext.prf) delete ext.prf.results;
  return first
    ? new Uint8Array(first instanceof ArrayBuffer ? first : first.buffer.slice(first.byteOffset, first.byteOffset + first.byteLength))
    : null;
}

function withPrf<T extends { extensions?: unknown }>(options: T): T {
  return { ...options, extensions: { ...(options.extensions as object | undefined), prf: { eval: { first: PRF_SALT } } } };
}

async function register(
  options: PublicKeyCredentialCreationOptionsJSON,
): Promise<{ response: RegistrationResponseJSON; prf: Uint8Array | null; prfEnabled: boolean }> {
  const response = await startRegistration({ optionsJSON: withPrf(options) });
  const prfEnabled = (response.clientExtensionResults as PrfOutput).prf?.enabled === true;
  return { response, prf: takePrf(response), prfEnabled };
}

/** The PRF output of a passkey just registered: some authenticators give it only on a get(). */
async function prfAfterRegistration(credentialId: string, transports: string[] | undefined): Promise<Uint8Array | null> {
  // A local ceremony: its assertion goes nowhere, only the PRF output is used.
  const optionsJSON = withPrf<PublicKeyCredentialRequestOptionsJSON>({
    challenge: bufferToBase64URLString(crypto.getRandomValues(new Uint8Array(32)).buffer),
    allowCredentials: [{ id: credentialId, type: 'public-key', ...(transports ? { transports: transports } : {}) }],
    userVerification: 'required',
  });
  const response = await startAuthentication({ optionsJSON });
  return takePrf(response);
}

/** Opens an enrollment link: registers a passkey and signs in. */
export async function enroll(invite: string, name: string): Promise<{ signedIn: SignedIn; unlocking: Unlocking }> {
  const { publicKey } = await api<{ publicKey: PublicKeyCredentialCreationOptionsJSON }>('POST', '/auth/enroll/options', { invite });
  const { response, prf, prfEnabled } = await register(publicKey);
  const signedIn = await api<SignedIn>('POST', '/auth/enroll', { invite, name, response });
  const unlocking = {
    credentialId: response.id,
    prf: prf ?? (prfEnabled ? await prfAfterRegistration(response.id, response.response.transports) : null),
  };
  return { signedIn, unlocking };
}

/**
 * Re-authentication: one of the member's passkeys confirms `operation` (with user verification)
 * just before it is sent. The server refuses a passkey added or a key replaced on the strength of
 * the session alone, which someone could have stolen (docs/app.md).
 */
export async function confirmWithPasskey(operation: ReauthOperation): Promise<AuthenticationResponseJSON> {
  const { publicKey } = await api<{ publicKey: PublicKeyCredentialRequestOptionsJSON }>('POST', '/me/reauth/options', { operation });
  return startAuthentication({ optionsJSON: publicKey });
}

/** Adds a passkey to the signed-in member, confirmed with one they already have. */
export async function addPasskey(name: string): Promise<Unlocking> {
  const reauth = await confirmWithPasskey('add-passkey');
  const { publicKey } = await api<{ publicKey: PublicKeyCredentialCreationOptionsJSON }>('POST', '/auth/passkeys/options');
  const { response, prf, prfEnabled } = await register(publicKey);
  await api('POST', '/auth/passkeys', { name, response, reauth });
  return {
    credentialId: response.id,
    prf: prf ?? (prfEnabled ? await prfAfterRegistration(response.id, response.response.transports) : null),
  };
}

/**
 * The PRF output of one of these passkeys, for unlocking the key again in a tab that still holds
 * its session (a reload): one prompt, nothing sent. Only the passkeys the key is wrapped for are
 * offered, so the one chosen can unlock it.
 */
export async function unlockingWith(credentialIds: string[]): Promise<Unlocking> {
  const optionsJSON = withPrf<PublicKeyCredentialRequestOptionsJSON>({
    challenge: bufferToBase64URLString(crypto.getRandomValues(new Uint8Array(32)).buffer),
    allowCredentials: credentialIds.map((id) => ({ id, type: 'public-key' as const })),
    userVerification: 'required',
  });
  const response = await startAuthentication({ optionsJSON });
  return { credentialId: response.id, prf: takePrf(response) };
}

/**
 * A passkey confirmation checked by this page alone (user verification, nothing sent): for what
 * only this page holds, the unlocked key (docs/app.md, "A new device").
 */
export async function confirmHere(): Promise<void> {
  await startAuthentication({
    optionsJSON: {
      challenge: bufferToBase64URLString(crypto.getRandomValues(new Uint8Array(32)).buffer),
      userVerification: 'required',
    },
  });
}

/** Withdraws the passkey prompt in progress, if any (the member chose to go on without it). */
export function cancelPrompt(): void {
  WebAuthnAbortService.cancelCeremony();
}

/** Signs in with a discoverable passkey: no account name is asked. */
export async function signIn(): Promise<{ signedIn: SignedIn; unlocking: Unlocking }> {
  const { publicKey } = await api<{ publicKey: PublicKeyCredentialRequestOptionsJSON }>('POST', '/auth/sign-in/options');
  const response: AuthenticationResponseJSON = await startAuthentication({ optionsJSON: withPrf(publicKey) });
  const prf = takePrf(response);
  const signedIn = await api<SignedIn>('POST', '/auth/sign-in', { response });
  return { signedIn, unlocking: { credentialId: response.id, prf } };
}
