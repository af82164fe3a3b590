(function () {
  // A value the link's hash carries (#name=value&...), or null. Anyone can send a link: a value that is not
  // valid percent-encoding (#status=%) counts as absent, and the page's script goes on.
  function fromHash(name) {
    var found = new RegExp('(?:^#|&)' + name + '=([^&]*)').exec(location.hash);
    if (!found) { return null; }
    try { return decodeURIComponent(found[1]); } catch (e) { return null; }
  }
  var boxes = document.querySelectorAll('.filter input[type=checkbox]');
  // A link may carry a filter: index.html#status=regression,known-fail
  var wanted = fromHash('status');
  if (wanted !== null) {
    var keep = wanted.split(',');
    boxes.forEach(function (b) { b.checked = keep.indexOf(b.value) >= 0; });
  }
  function apply() {
    var on = {};
    boxes.forEach(function (b) { on[b.value] = b.checked; });
    document.querySelectorAll('td.cell').forEach(function (td) {
      td.classList.toggle('dim', !on[td.getAttribute('data-status')]);
    });
  }
  boxes.forEach(function (b) { b.addEventListener('change', apply); });
  apply();
  // One release at a time (the newest first); a link may pick one: #release=0.28.0
  var select = document.getElementById('release');
  function show() {
    document.querySelectorAll('section.release').forEach(function (sec) {
      sec.hidden = select.value !== 'all' && sec.getAttribute('data-release') !== select.value;
    });
  }
  if (select) {
    var picked = fromHash('release');
    if (picked !== null) { choose(select, picked); }
    select.addEventListener('change', show);
    show();
  }
  // "Does it work on my set-up?": the axes' values joined by "-" are a cell id; the answer is that
  // cell's own sentence in the chosen release's grid. A link may preset it: #setup=cuda-wsl2new-v2-graph&release=0.33.0
  var form = document.getElementById('setup');
  if (!form) { return; }
  var axes = form.querySelectorAll('select[data-axis]');
  var release = document.getElementById('setup-release');
  var out = document.getElementById('setup-answer');
  var link = document.getElementById('setup-link');
  var chosen = null;
  function choose(sel, value) {
    for (var i = 0; i < sel.options.length; i++) {
      if (sel.options[i].value === value) { sel.value = value; return true; }
    }
    return false;
  }
  function cell() {
    var id = Array.prototype.map.call(axes, function (s) { return s.value; }).join('-');
    var found = null;
    document.querySelectorAll('section.release').forEach(function (sec) {
      if (sec.getAttribute('data-release') !== release.value) { return; }
      sec.querySelectorAll('td.cell').forEach(function (td) {
        if (td.getAttribute('data-cell') === id) { found = td; }
      });
    });
    return {id: id, td: found};
  }
  function answer() {
    var got = cell();
    if (chosen) { chosen.removeAttribute('aria-current'); }
    chosen = got.td;
    var box = out.parentNode;
    link.href = '#setup=' + got.id + '&release=' + encodeURIComponent(release.value);
    if (!chosen) {
      out.value = '';
      box.removeAttribute('data-verdict');
      box.style.removeProperty('--v');
      box.querySelector('.sym').textContent = '';
      return;
    }
    chosen.setAttribute('aria-current', 'true');  // an attribute: the cell's classes stay the filter's
    out.value = chosen.querySelector('.answer').textContent;
    box.setAttribute('data-verdict', chosen.getAttribute('data-verdict'));
    box.style.setProperty('--v', chosen.style.getPropertyValue('--v'));
    box.querySelector('.sym').textContent = chosen.querySelector('.verdict .sym').textContent;
    // Show the chosen release, so the highlighted cell is on the page (unless all releases are).
    if (select && select.value !== 'all' && select.value !== release.value) {
      select.value = release.value;
      show();
    }
  }
  function preset() {
    var setup = fromHash('setup');
    var vllm = fromHash('release');
    if (vllm !== null) { choose(release, vllm); }
    if (setup !== null) {
      var parts = setup.split('-');
      if (parts.length === axes.length) {
        axes.forEach(function (s, i) { choose(s, parts[i]); });
      }
    }
    return setup !== null;
  }
  form.addEventListener('submit', function (e) { e.preventDefault(); });
  form.querySelectorAll('select').forEach(function (s) { s.addEventListener('change', answer); });
  if (select) {
    select.addEventListener('change', function () {
      if (select.value !== 'all' && choose(release, select.value)) { answer(); }
    });
    if (fromHash('release') === null && select.value !== 'all') { choose(release, select.value); }
  }
  link.addEventListener('click', function () {
    if (chosen) { chosen.scrollIntoView({block: 'center'}); }
  });
  window.addEventListener('hashchange', function () {
    if (preset()) { answer(); }
  });
  preset();
  answer();
})();
