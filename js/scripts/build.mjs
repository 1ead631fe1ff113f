// js/scripts/build.mjs — builds the addon build/specula.node (npm install / npm run build):
// CMake builds the repository's engine and js/src/addon.cpp into one module, in
// ../build/js beside build/release (same compile commands: ccache shares the objects), with
// the Node-API headers of the node-api-headers and node-addon-api packages.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.resolve(here, '..');
const root = path.resolve(pkg, '..');
const buildDir = path.join(root, 'build', 'js');
const napiHeaders = path.join(path.dirname(require.resolve('node-api-headers/package.json')), 'include');
const addonApi = path.dirname(require.resolve('node-addon-api/package.json'));

const run = (cmd, args) => execFileSync(cmd, args, { stdio: 'inherit' });
run('cmake', ['-S', root, '-B', buildDir, '-G', 'Ninja', '-DCMAKE_BUILD_TYPE=Release', '-DSPECULA_BUILD_TESTS=OFF',
              '-DSPECULA_BUILD_BENCH=OFF', '-DCMAKE_C_COMPILER=cc', '-DCMAKE_CXX_COMPILER=c++',
              `-DSPECULA_NODE_API_INCLUDE=${napiHeaders}`, `-DSPECULA_NODE_ADDON_API_INCLUDE=${addonApi}`]);
run('cmake', ['--build', buildDir, '--target', 'specula_node']);
mkdirSync(path.join(pkg, 'build'), { recursive: true });
copyFileSync(path.join(buildDir, 'specula.node'), path.join(pkg, 'build', 'specula.node'));
console.log(`specula: built ${path.join(pkg, 'build', 'specula.node')}`);
