// The two helpers every module of the mail environment uses.
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function errCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException | null)?.code;
}
