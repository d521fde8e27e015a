// node --import ./bench/hide-otel.mjs: @opentelemetry/* cannot be imported, as in an
// application that never installed it.
import { register } from 'node:module';

register('data:text/javascript,' + encodeURIComponent(`
export async function resolve(specifier, context, next) {
  if (specifier.startsWith('@opentelemetry/')) {
    const err = new Error('Cannot find package ' + specifier);
    err.code = 'ERR_MODULE_NOT_FOUND';
    throw err;
  }
  return next(specifier, context);
}`));
