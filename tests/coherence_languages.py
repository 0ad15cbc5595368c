"""The first six triples of ``coherence_triples`` (request, correct answer, off-topic answer)
written in eight other languages, for what the default embedder, an English model, does with
them."""

from __future__ import annotations

LANGUAGES: dict[str, list[tuple[str, str, str]]] = {
    "Spanish": [
        (
            "¿Qué tiempo hace hoy en París?",
            "Hace sol y 21 °C en París.",
            "Su pedido n.º 4521 se ha enviado y llegará el viernes.",
        ),
        (
            "¿Dónde está mi pedido 4521?",
            "El pedido 4521 salió ayer de nuestro almacén y debería llegar el viernes.",
            "La capital de Australia es Canberra.",
        ),
        (
            "¿Cómo restablezco mi contraseña?",
            "Haga clic en «Olvidé mi contraseña» en la página de inicio y siga el enlace que le enviamos.",
            "Mañana lloverá con una máxima de 14 grados.",
        ),
        (
            "¿Me pueden devolver el dinero por un artículo dañado?",
            "Sí, los artículos dañados se reembolsan por completo; envíenos una foto y lo tramitaremos.",
            "Las listas de Python son secuencias ordenadas y mutables.",
        ),
        (
            "Resérvame un vuelo de Londres a Nueva York el próximo lunes.",
            "Le he reservado el vuelo de las 9:40 de Heathrow a JFK el próximo lunes.",
            "La receta lleva dos huevos, harina y una taza de leche.",
        ),
        (
            "¿Cuántos días de vacaciones me quedan este año?",
            "Le quedan 7 días de vacaciones para este año.",
            "La Torre Eiffel mide 330 metros.",
        ),
    ],
    "French": [
        (
            "Quel temps fait-il à Paris aujourd'hui ?",
            "Il fait beau et 21 °C à Paris.",
            "Votre commande n° 4521 a été expédiée et arrivera vendredi.",
        ),
        (
            "Où est ma commande 4521 ?",
            "La commande 4521 a quitté notre entrepôt hier et devrait arriver vendredi.",
            "La capitale de l'Australie est Canberra.",
        ),
        (
            "Comment réinitialiser mon mot de passe ?",
            "Cliquez sur « Mot de passe oublié » sur la page de connexion et suivez le lien que nous vous envoyons.",
            "Demain il pleuvra avec un maximum de 14 degrés.",
        ),
        (
            "Puis-je être remboursé pour un article endommagé ?",
            "Oui, les articles endommagés sont remboursés intégralement ; envoyez-nous une photo et nous nous en occupons.",
            "Les listes Python sont des séquences ordonnées et modifiables.",
        ),
        (
            "Réservez-moi un vol de Londres à New York lundi prochain.",
            "Je vous ai réservé le vol de 9 h 40 de Heathrow à JFK lundi prochain.",
            "La recette demande deux œufs, de la farine et une tasse de lait.",
        ),
        (
            "Combien de jours de congé me reste-t-il cette année ?",
            "Il vous reste 7 jours de congé pour cette année.",
            "La tour Eiffel mesure 330 mètres.",
        ),
    ],
    "German": [
        (
            "Wie ist das Wetter heute in Paris?",
            "In Paris ist es sonnig und 21 °C warm.",
            "Ihre Bestellung Nr. 4521 wurde versandt und kommt am Freitag an.",
        ),
        (
            "Wo ist meine Bestellung 4521?",
            "Die Bestellung 4521 hat gestern unser Lager verlassen und sollte am Freitag ankommen.",
            "Die Hauptstadt von Australien ist Canberra.",
        ),
        (
            "Wie setze ich mein Passwort zurück?",
            "Klicken Sie auf der Anmeldeseite auf „Passwort vergessen“ und folgen Sie dem Link, den wir Ihnen schicken.",
            "Morgen wird es regnerisch bei höchstens 14 Grad.",
        ),
        (
            "Bekomme ich für einen beschädigten Artikel mein Geld zurück?",
            "Ja, beschädigte Artikel werden voll erstattet; schicken Sie uns ein Foto, und wir kümmern uns darum.",
            "Python-Listen sind geordnete, veränderbare Folgen.",
        ),
        (
            "Buche mir einen Flug von London nach New York am nächsten Montag.",
            "Ich habe Sie auf den Flug um 9:40 Uhr von Heathrow nach JFK am nächsten Montag gebucht.",
            "Für das Rezept braucht man zwei Eier, Mehl und eine Tasse Milch.",
        ),
        (
            "Wie viele Urlaubstage habe ich dieses Jahr noch?",
            "Sie haben dieses Jahr noch 7 Urlaubstage.",
            "Der Eiffelturm ist 330 Meter hoch.",
        ),
    ],
    "Russian": [
        (
            "Какая сегодня погода в Париже?",
            "В Париже солнечно, 21 °C.",
            "Ваш заказ № 4521 отправлен и прибудет в пятницу.",
        ),
        (
            "Где мой заказ 4521?",
            "Заказ 4521 вчера покинул наш склад и должен прибыть в пятницу.",
            "Столица Австралии — Канберра.",
        ),
        (
            "Как сбросить пароль?",
            "Нажмите «Забыли пароль» на странице входа и перейдите по ссылке из нашего письма.",
            "Завтра будет дождливо, до 14 градусов.",
        ),
        (
            "Можно ли вернуть деньги за повреждённый товар?",
            "Да, за повреждённые товары деньги возвращаются полностью; пришлите нам фото, и мы всё оформим.",
            "Списки в Python — упорядоченные изменяемые последовательности.",
        ),
        (
            "Забронируй мне рейс из Лондона в Нью-Йорк на следующий понедельник.",
            "Я забронировал вам рейс в 9:40 из Хитроу в аэропорт JFK на следующий понедельник.",
            "Для рецепта нужны два яйца, мука и стакан молока.",
        ),
        (
            "Сколько дней отпуска у меня осталось в этом году?",
            "В этом году у вас осталось 7 дней отпуска.",
            "Высота Эйфелевой башни — 330 метров.",
        ),
    ],
    "Chinese": [
        ("今天巴黎天气怎么样？", "巴黎今天晴天，气温21°C。", "您的订单4521已发货，将于周五送达。"),
        (
            "我的订单4521在哪里？",
            "订单4521昨天已离开我们的仓库，预计周五送达。",
            "澳大利亚的首都是堪培拉。",
        ),
        (
            "我怎么重置密码？",
            "在登录页面点击“忘记密码”，然后按照我们发给您的邮件中的链接操作。",
            "明天有雨，最高气温14度。",
        ),
        (
            "商品损坏可以退款吗？",
            "可以，损坏的商品全额退款；请发给我们一张照片，我们会为您处理。",
            "Python的列表是有序且可变的序列。",
        ),
        (
            "帮我订一张下周一从伦敦飞纽约的机票。",
            "我已为您预订了下周一9:40从希思罗机场飞往肯尼迪机场的航班。",
            "这道菜需要两个鸡蛋、面粉和一杯牛奶。",
        ),
        ("我今年还剩几天年假？", "您今年还剩7天年假。", "埃菲尔铁塔高330米。"),
    ],
    "Japanese": [
        (
            "今日のパリの天気は？",
            "パリは晴れで、気温は21°Cです。",
            "ご注文番号4521は発送済みで、金曜日に届きます。",
        ),
        (
            "注文4521はどこですか？",
            "注文4521は昨日倉庫を出発し、金曜日に届く予定です。",
            "オーストラリアの首都はキャンベラです。",
        ),
        (
            "パスワードをリセットするには？",
            "ログインページで「パスワードをお忘れですか」をクリックし、メールのリンクに従ってください。",
            "明日は雨で、最高気温は14度です。",
        ),
        (
            "破損した商品は返金してもらえますか？",
            "はい、破損した商品は全額返金します。写真を送っていただければ手続きします。",
            "Pythonのリストは順序付きで変更可能なシーケンスです。",
        ),
        (
            "来週の月曜日にロンドンからニューヨークへの便を予約して。",
            "来週の月曜日、ヒースロー発JFK行きの9時40分の便を予約しました。",
            "このレシピには卵2個、小麦粉、牛乳1カップが必要です。",
        ),
        (
            "今年の有給休暇はあと何日残っていますか？",
            "今年の有給休暇は残り7日です。",
            "エッフェル塔の高さは330メートルです。",
        ),
    ],
    "Korean": [
        (
            "오늘 파리 날씨 어때요?",
            "파리는 맑고 기온은 21°C입니다.",
            "주문 번호 4521이 발송되었으며 금요일에 도착합니다.",
        ),
        (
            "제 주문 4521은 어디에 있나요?",
            "주문 4521은 어제 창고에서 출발했으며 금요일에 도착할 예정입니다.",
            "호주의 수도는 캔버라입니다.",
        ),
        (
            "비밀번호를 어떻게 재설정하나요?",
            "로그인 페이지에서 '비밀번호 찾기'를 누르고 이메일로 보내드린 링크를 따라가세요.",
            "내일은 비가 오고 최고 기온은 14도입니다.",
        ),
        (
            "파손된 상품은 환불받을 수 있나요?",
            "네, 파손된 상품은 전액 환불됩니다. 사진을 보내주시면 처리해 드리겠습니다.",
            "파이썬 리스트는 순서가 있고 변경 가능한 시퀀스입니다.",
        ),
        (
            "다음 주 월요일 런던에서 뉴욕 가는 항공편을 예약해 줘.",
            "다음 주 월요일 9시 40분 히스로발 JFK행 항공편을 예약했습니다.",
            "이 요리에는 달걀 두 개, 밀가루, 우유 한 컵이 필요합니다.",
        ),
        (
            "올해 남은 휴가가 며칠인가요?",
            "올해 남은 휴가는 7일입니다.",
            "에펠탑의 높이는 330미터입니다.",
        ),
    ],
    "Hindi": [
        (
            "आज पेरिस में मौसम कैसा है?",
            "पेरिस में धूप है और तापमान 21°C है।",
            "आपका ऑर्डर 4521 भेज दिया गया है और शुक्रवार को पहुँचेगा।",
        ),
        (
            "मेरा ऑर्डर 4521 कहाँ है?",
            "ऑर्डर 4521 कल हमारे गोदाम से निकल गया और शुक्रवार तक पहुँच जाना चाहिए।",
            "ऑस्ट्रेलिया की राजधानी कैनबरा है।",
        ),
        (
            "मैं अपना पासवर्ड कैसे रीसेट करूँ?",
            "साइन-इन पेज पर 'पासवर्ड भूल गए' पर क्लिक करें और ईमेल में भेजे गए लिंक का पालन करें।",
            "कल बारिश होगी और अधिकतम तापमान 14 डिग्री रहेगा।",
        ),
        (
            "क्या क्षतिग्रस्त सामान का रिफ़ंड मिल सकता है?",
            "हाँ, क्षतिग्रस्त सामान का पूरा रिफ़ंड मिलता है; हमें एक फ़ोटो भेजें और हम इसे प्रोसेस कर देंगे।",
            "पायथन की सूचियाँ क्रमबद्ध और परिवर्तनीय अनुक्रम हैं।",
        ),
        (
            "अगले सोमवार को लंदन से न्यूयॉर्क की फ़्लाइट बुक कर दो।",
            "मैंने आपको अगले सोमवार को हीथ्रो से JFK की 9:40 वाली फ़्लाइट पर बुक कर दिया है।",
            "इस रेसिपी में दो अंडे, आटा और एक कप दूध चाहिए।",
        ),
        (
            "इस साल मेरी कितनी छुट्टियाँ बाकी हैं?",
            "इस साल आपकी 7 छुट्टियाँ बाकी हैं।",
            "एफ़िल टॉवर 330 मीटर ऊँचा है।",
        ),
    ],
}
